from mneme.cli._launch import main

main()
