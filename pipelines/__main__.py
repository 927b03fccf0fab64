"""`python -m pipelines` is the `gateway-recon` console script."""

from pipelines.cli import main

if __name__ == "__main__":
    main()
