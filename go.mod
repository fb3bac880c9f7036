module github.com/wharf/wharf

go 1.26.8
