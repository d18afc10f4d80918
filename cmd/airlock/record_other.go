//go:build !linux

package main

const syscallNoFollow = 0
