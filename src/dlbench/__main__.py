from dlbench.cli import main

main()
