"""`python -m transpile` runs the command line."""

from transpile.cli.app import main

if __name__ == "__main__":
    main()
