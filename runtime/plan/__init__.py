"""The runtime's only input and what it needs: ``document`` (plan.json loaded and checked against
schemas/plan.v1.json and the layout), ``inputs`` (the one guarded reader of every input file) and
``gate`` (the backends the plan needs import here, checked before megatron-core is imported)."""
