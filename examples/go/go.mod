module shardrec-example

go 1.19

require shardrec.dev/shardrec v0.0.0

replace shardrec.dev/shardrec => ../../bindings/go
