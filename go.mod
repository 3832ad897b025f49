module github.com/holdfast-dev/holdfast

go 1.26.0
