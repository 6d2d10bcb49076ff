"""The run supervisor: a small process per run, between tickui and the run's command, that
keeps the run's gate, output, end and lease without needing the tickui process that
started it (see tickui.supervisor.main for what it guarantees).

A package of its own, under dispatch and worker, because the supervisor runs as
`python -I -S` and must load nothing but the standard library and
tickui.common.boundedlog: importing any tickui.dispatch module runs
tickui/dispatch/__init__, which loads the dispatchers. Nothing is imported here.

Supervisors are forked by a supervisor server (server.py, driven by client.py), a
long-lived interpreter with them imported; launch.py starts either as a program.
"""
