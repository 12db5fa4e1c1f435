"""Contracts every plane shares: the request state machine, queues, iteration profiles, clocks and
the value types exchanged between orchestration, policies, replicas and engines. Imports no other
room."""
