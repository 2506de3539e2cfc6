"""What a command prints when it fails: one line saying what is wrong and what to do, exit
status 2, and no traceback unless -v asked for one.

The commands let the library's exceptions rise; the `globalstore` group turns each into a
UserError here, so every command reads the same way.
"""

from __future__ import annotations

import click

from globalstore.errors import (
    BrokerUnavailable,
    GlobalStoreError,
    StartTimeout,
    StoreLocked,
    TopicNotFound,
)
from globalstore.localkafka import LocalKafkaError

__all__ = ["EXPLAINED", "UserError", "explain"]

# The exceptions that are the user's to fix: the message is for them, the traceback is not.
EXPLAINED = (GlobalStoreError, LocalKafkaError)

_WHAT_TO_DO: dict[type[Exception], str] = {
    TopicNotFound: "check the topic's name and --bootstrap-servers",
    BrokerUnavailable: "start one with `globalstore kafka start`, or point --bootstrap-servers "
    "(or GLOBALSTORE_BOOTSTRAP) at yours",
    StoreLocked: "stop that process or use another --path; get, scan, count and status can "
    "still look in",
    StartTimeout: "give it longer with --timeout",
}


class UserError(click.ClickException):
    """A failure the user can fix: printed as one `error: ...` line, exit status 2."""

    exit_code = 2

    def format_message(self) -> str:
        """The message alone."""
        return self.message

    def show(self, file: object = None) -> None:
        """Print "error: <message>" to stderr, without click's usage text."""
        click.echo(f"error: {self.message}", err=True)


# The library's messages name its keyword arguments; a command's name its options.
_FLAGS = {"allow_uncompacted=True": "--allow-uncompacted"}


def explain(exc: BaseException) -> UserError:
    """One line: the exception's own message, then what to do about it where we know."""
    message = " ".join(str(exc).split())  # librdkafka and RocksDB messages span lines
    for keyword, flag in _FLAGS.items():
        message = message.replace(keyword, flag)
    for kind, what_to_do in _WHAT_TO_DO.items():
        if isinstance(exc, kind):
            return UserError(f"{message}; {what_to_do}")
    return UserError(message)
