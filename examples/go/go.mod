module shardrec-example

go 1.19

require shardrec v0.0.0

replace shardrec => ../../bindings/go
