"""The local stack's error set: one class per thing the caller must do next.

Every message says what went wrong *and* what to do about it, because these surface directly
in `streamctl stack ...` output. Neighbours: every other module in `stack/` raises these;
`streamctl.stack.cli` catches `StackError` and prints the message.
"""

from __future__ import annotations


class StackError(Exception):
    """Base class: the local stack cannot do what was asked; the message says why and what next."""


class JavaMissingError(StackError):
    """No `java` executable: install a JDK/JRE 17+ or set JAVA_HOME."""


class JavaTooOldError(StackError):
    """`java` is older than the broker needs: install Java 17+ or point JAVA_HOME at it."""


class MavenMissingError(StackError):
    """No `mvn` executable: install Maven."""


class MavenResolutionError(StackError):
    """Maven could not resolve a pom; the message carries Maven's ERROR lines."""


class PortInUseError(StackError):
    """A port the broker needs is taken: free it or choose another one."""


class BrokerConflictError(StackError):
    """A broker from the same state dir already runs with different settings: stop it first."""


class BrokerFormatError(StackError):
    """Formatting the KRaft storage failed; the message carries the tool's output."""


class BrokerExitedError(StackError):
    """The broker process exited during start-up; the message carries the log tail."""


class BrokerNotReadyError(StackError):
    """The broker did not answer a metadata request before the deadline; see the log tail."""


class TopicError(StackError):
    """Creating, describing or deleting a topic failed; the message names the topic."""
