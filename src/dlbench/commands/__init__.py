"""The commands the command line calls, one module per family: `run`, `suite`, `system`, `data`,
`results` (results, export, import), `report` (report, compare), `doctor`.

Each declares its parameters as a typed request class (cli.py makes the command line from it)
and its handler reads the request, calls the layers below (launch/ for what runs, report/ and
results/ for what is stored) and returns the exit status. No layer below imports this package.
"""
