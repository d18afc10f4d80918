package main

import "syscall"

const syscallNoFollow = syscall.O_NOFOLLOW
