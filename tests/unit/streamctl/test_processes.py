"""`streamctl.processes`: SIGTERM unwinds like Ctrl-C while `sigterm_as_interrupt` holds, so
the demo, the benchmarks and the test suite stop the children they started."""

from __future__ import annotations

import os
import signal

import pytest

from streamctl.processes import sigterm_as_interrupt


def test_sigterm_raises_keyboard_interrupt_inside_the_block_and_the_old_handler_returns(
        ) -> None:
    before = signal.getsignal(signal.SIGTERM)
    cleaned_up = False
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"), sigterm_as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before kill returns
        finally:
            cleaned_up = True
    assert cleaned_up
    assert signal.getsignal(signal.SIGTERM) == before
