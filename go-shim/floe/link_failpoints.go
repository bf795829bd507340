//go:build floe_failpoints

package floe

/*
#cgo CFLAGS: -DFLOE_FAILPOINTS
#cgo LDFLAGS: -L${SRCDIR}/../../target/failpoints -lfloe -lm -ldl -lpthread
#include <stdlib.h>
#include "floe.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// armFailpoint makes libfloe panic the next time it passes failpoint name (see
// src/failpoint.rs). Only in builds with the floe_failpoints tag.
func armFailpoint(name string) error {
	cName := C.CString(name)
	defer C.free(unsafe.Pointer(cName))
	if status := C.floe_failpoint_arm(cName); status != C.FLOE_STATUS_OK {
		return fmt.Errorf("arming failpoint %q: status %d", name, int(status))
	}
	return nil
}
