"""`python -m dlbench` and the `dlbench` command. Ctrl-C is taken over before the command line
loads (launch/interrupts.py), so one pressed in the first second is answered like any other. Then,
before anything imports torch, where torch's install keeps no bytecode it goes under dlbench's
cache, for this process and every one it starts (bytecode.py). The command's end is the process's
end: where it imported torch, without torch's teardown (launch/leave.py); `cli.main` itself only
raises SystemExit, for whoever calls it in a process that goes on."""


def main() -> None:
    import time

    import dlbench
    from dlbench.launch import interrupts

    dlbench.command_started = time.monotonic()

    interrupts.install()
    try:
        from dlbench import bytecode

        bytecode.use_cache()
        from dlbench.cli import main as command_line
    except KeyboardInterrupt:
        interrupts.stop(None)
    try:
        command_line()
    except SystemExit as end:  # the process's end: quick where it imported torch (launch/leave.py)
        from dlbench.launch.leave import leave

        leave(end.code if isinstance(end.code, int) else 0 if end.code is None else 1)


if __name__ == "__main__":
    main()
