"""`python -m dlbench` and the `dlbench` command. Ctrl-C is taken over before the command line
loads (launch/interrupts.py), so one pressed in the first second is answered like any other. Then,
before anything imports torch, where torch's install keeps no bytecode it goes under dlbench's
cache, for this process and every one it starts (bytecode.py)."""


def main() -> None:
    from dlbench.launch import interrupts

    interrupts.install()
    try:
        from dlbench import bytecode

        bytecode.use_cache()
        from dlbench.cli import main as command_line
    except KeyboardInterrupt:
        interrupts.stop(None)
    command_line()


if __name__ == "__main__":
    main()
