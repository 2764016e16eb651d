from cairn.cli.main import main

main()
