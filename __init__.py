"""The repository root as a package of folders, for tools that read the tree without an install.

Nothing imports it: installed, the folders are ``rmq_cluster.<folder>`` (pyproject.toml). With
this file an editor or a structure tool resolves ``from ..store import x`` in ``broker/`` to
``store/`` as the installed package does.
"""
