module wordcount

go 1.21
