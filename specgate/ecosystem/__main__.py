from specgate.ecosystem.cli import run

run()
