"""The liveness check of the broker's process, on /proc contents seen on this machine."""

from __future__ import annotations

import os

from streamctl.stack.process import is_alive, proc_entry_alive

MARKER = "/state/kafka/server.properties"
RUNNING = "16571 (java) R 12329 16571 16571 0 -1 4194304 2 0 0 0 0 0 0 0 20 0 1 0 394523\n"
ZOMBIE = "16571 (java) Z 12329 16571 16571 0 -1 4194304 2 0 0 0 0 0 0 0 20 0 1 0 394523\n"


def test_a_process_in_the_middle_of_exec_is_alive() -> None:
    # Read right after Popen returned: the new image's command line was not set up yet.
    assert proc_entry_alive(RUNNING, b"", MARKER)


def test_a_process_running_something_else_is_not_the_broker() -> None:
    other = b"/usr/bin/python3\x00-m\x00http.server\x00"
    assert not proc_entry_alive(RUNNING, other, MARKER)
    assert proc_entry_alive(RUNNING, b"java\x00" + MARKER.encode() + b"\x00", MARKER)


def test_a_zombie_or_an_unreadable_stat_is_not_alive() -> None:
    assert not proc_entry_alive(ZOMBIE, b"java\x00" + MARKER.encode(), MARKER)
    assert not proc_entry_alive("16571 (java", b"", None)


def test_a_command_name_with_parentheses_and_spaces_is_parsed() -> None:
    assert proc_entry_alive("7 (a) b (c) S 1 7 7\n", b"x", None)


def test_this_process_is_alive_and_a_free_pid_is_not() -> None:
    assert is_alive(os.getpid())
    assert not is_alive(2**22 + 1)  # above pid_max's ceiling: never a process
