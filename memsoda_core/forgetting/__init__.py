"""Forgetting, in one place: an entity or a scope, what was learned from a source, retention by age
(`rules`: the values and checks; `operations`, `retention`: the operations; `deleting`,
`retention_statements`: their SQL). Every delete of facts is `deleting.delete_facts`, under
`operations.hold_scope`."""
