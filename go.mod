module github.com/inloop/inloop

go 1.26
