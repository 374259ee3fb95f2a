// The project's own vcsim: govmomi's vSphere simulator library from Debian's
// golang-github-vmware-govmomi-dev (0.24.2), built offline (scripts/vsphere/vcsim build).
module vcsim-main

go 1.19

require (
	github.com/google/uuid v0.0.0
	github.com/vmware/govmomi v0.0.0
)

replace github.com/vmware/govmomi => /usr/share/gocode/src/github.com/vmware/govmomi

replace github.com/google/uuid => /usr/share/gocode/src/github.com/google/uuid
