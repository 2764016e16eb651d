from cairn.cli.entry import main

main()
