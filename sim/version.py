"""clustersim's version: one source, read by ``sim.__version__``, the CLI, reports and the
package metadata (``pyproject.toml`` reads it as a dynamic attribute)."""

__version__ = "0.1.0"
