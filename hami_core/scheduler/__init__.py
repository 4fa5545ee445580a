"""The scheduler service: kube-scheduler extender (filter/bind), admission webhook, node locks, metrics.

:class:`~hami_core.scheduler.extender.Extender` and :class:`~hami_core.scheduler.webhook.Webhook` hold the
logic; :class:`~hami_core.scheduler.server.SchedulerServer` serves them over HTTP(S);
:class:`~hami_core.scheduler.sync.Sync` feeds the engine from a :class:`~hami_core.cluster.base.Cluster`.
:func:`~hami_core.scheduler.app.build` wires all of them together.
"""
