// Package check holds no code: its tests check deploy/ and the Dockerfile at the repository root.
package check
