"""The `ovm-offline` command. Each subcommand is a thin layer over the library; errors in the
input reach the user as one line and a non-zero exit status."""

from __future__ import annotations

import os
import sys
import traceback

import click

from .errors import OvmError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ovm-offline")
def cli() -> None:
    """Extract Linux processes from recorded or paused VM memory into CRIU images."""


def main() -> None:
    try:
        cli(standalone_mode=False)
    except OvmError as e:
        click.echo(f"ovm-offline: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("ovm-offline: interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("ovm-offline: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except BrokenPipeError:
        # `ovm-offline ps dump | head`: the reader went away; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Exception as e:  # a bug of ours, not bad input: say so, and where to look
        if os.environ.get("OVM_DEBUG"):
            traceback.print_exc()
        click.echo(f"ovm-offline: internal error: {type(e).__name__}: {e} (set OVM_DEBUG=1 for a traceback)", err=True)
        sys.exit(70)


if __name__ == "__main__":
    main()
