// Package floe is the cgo binding to libfloe, the Rust data plane behind the
// Benthos `iceberg` output. The #cgo directives live in this file, except the
// library's path: link_release.go links the shipped build, link_failpoints.go (build
// tag floe_failpoints, tests only) a build whose failpoints can be armed.
package floe

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#include <stdlib.h>
#include "floe.h"
*/
import "C"
