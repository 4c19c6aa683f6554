"""``python -m tailcut``: the same command group as the ``tailcut`` console script."""

from tailcut.cli import cli

if __name__ == "__main__":
    cli()
