-- error with a table, not a message: the error must still say which scenario and what it was
error({})
