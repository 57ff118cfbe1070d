"""The standalone supervisor's service: the `Fleet` of runtimes behind ``inferactors run``.

Above `_actors` and below `_cli`: it may import the actors, edges, policy, models, config
and the vocabulary; only `_cli` (and the public names in ``inferactors``) import it.
"""
