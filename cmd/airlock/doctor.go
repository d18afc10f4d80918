package main

import "github.com/spf13/cobra"

func newDoctorCmd() *cobra.Command {
	return &cobra.Command{Use: "doctor", Short: "Check which isolation layers this host can give"}
}
