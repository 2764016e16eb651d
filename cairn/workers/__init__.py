"""Workers: the Celery app, the node task and the step context handlers run with.

Only this package imports Celery. (The durable execution path lands here next; until
then the decider's :class:`~cairn.model.commands.Dispatch` commands have no
executor in the package.)
"""
