"""Tables and plots of the quality benchmark (filled in below)."""


def report(summary, variants, out):
    pass
