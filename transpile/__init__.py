"""triton-transpile: plain Triton kernels in, explicit Gluon variants out.

Entry points: :func:`transpile.engine.translate_source` (text in, variants out), then
:func:`transpile.engine.format_results` (the variants laid out as the command line writes them), and the
``transpile`` command line.
"""

__version__ = "0.1.0"
