"""Studies shipped with clustersim: a base scenario and a sweep grid each (``clustersim sweep studies/NAME``)."""
