"""The composition root and the command line: ``compose`` wires the parts (services, pipeline, rule firing),
``cli`` is the ``concentrator`` command (``serve``, ``tail``, ``replay``), ``server`` runs the app under gunicorn,
``replay`` runs recorded streams through rules, ``client`` is the Python client of continuous responses and uploads."""
