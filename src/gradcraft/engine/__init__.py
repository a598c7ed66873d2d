"""The lazy graph: nodes, scheduling, realization, memory accounting."""
