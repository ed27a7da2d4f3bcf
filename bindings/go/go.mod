module shardrec

go 1.19
