"""GNN networks built from flashgnn.nn layers (installed as flashgnn.models)."""
