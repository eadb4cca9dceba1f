"""What an operator does and reads: the audit trail, approvals, the views of runs and unwinds, and
the actions (unwind, retry, approve) every front end goes through."""
