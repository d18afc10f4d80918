package record

import "golang.org/x/sys/unix"

const unixHdr = unix.NLMSG_HDRLEN
