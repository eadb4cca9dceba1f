"""Recording a run: plans, tools and their hooks, calls settled against the journal (this run's and
the ones shared across runs), the durable run loop and ``saga`` blocks."""
