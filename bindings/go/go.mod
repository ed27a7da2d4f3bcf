module shardrec.dev/shardrec

go 1.19
