"""`python -m gateway` is the `gateway` console script."""

from gateway.cli import main

if __name__ == "__main__":
    main()
