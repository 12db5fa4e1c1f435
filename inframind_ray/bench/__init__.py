"""``inframind bench``: policies side by side on the twin over a sweep of arrival rates."""
