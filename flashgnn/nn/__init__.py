"""GNN layers on ME-BCRS ops."""
