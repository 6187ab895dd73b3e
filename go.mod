module github.com/agentd/agentd

go 1.26.8

require (
	github.com/alecthomas/kong v1.17.0
	go.etcd.io/bbolt v1.5.0
)

require (
	github.com/cockroachdb/datadriven v1.0.3 // indirect
	github.com/looplab/fsm v1.0.3 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
