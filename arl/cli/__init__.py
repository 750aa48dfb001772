"""The `arl` command: one module per group of subcommands, registered in main."""
