from mneme.cli.main import main

main()
