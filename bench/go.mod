module github.com/holdfast-dev/holdfast/bench

go 1.26.0

require (
	github.com/dgraph-io/ristretto/v2 v2.4.2
	github.com/holdfast-dev/holdfast v0.0.0
	github.com/maypok86/otter/v2 v2.4.0
	github.com/viccon/sturdyc v1.1.5
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/holdfast-dev/holdfast => ../
