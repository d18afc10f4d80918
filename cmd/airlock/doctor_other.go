//go:build !linux && !airlock_lean

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newDoctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Report the isolation layers this host can give",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("airlock sandboxes need Linux; this host cannot give any isolation layer")
		},
	}
}
