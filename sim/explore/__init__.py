"""``clustersim explore``: a local web page to turn a training job's knobs and watch its step.

A thin front over the simulator's Python API: :mod:`sim.explore.state` reads the page's
controls (the URL's query) into a scenario, :mod:`sim.explore.api` simulates it on the
analytical network and returns the step as JSON, :mod:`sim.explore.server` serves both and
the page (its JavaScript draws; it computes nothing). Plotting needs the ``[explore]``
extra (plotly's bundled ``plotly.min.js``, served from this machine: no network).
"""
