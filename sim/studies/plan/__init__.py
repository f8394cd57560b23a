"""Layout search (``clustersim plan``): the space, memory pruning, step-time bounds, the search."""
