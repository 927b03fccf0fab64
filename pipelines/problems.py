"""Problems a user can fix from the command line: `gateway-recon` reports them in one line each."""


class UsageProblem(ValueError):
    """A setting or input the job cannot work with; the message says what and how to fix it."""
